"""The fixed English utterances of fdb's synthetic datasets (written for fdb; license-free).

Sample ``i`` (1-based) of a subset uses entry ``(i - 1 + offset) % len(list)``, so the
datasets are the same on every machine and a larger set extends a smaller one.
"""

from __future__ import annotations

QUESTIONS = (
    "What is the capital of France?",
    "How do I make a good cup of coffee?",
    "Can you recommend a book for a long flight?",
    "Why is the sky blue?",
    "What should I pack for a weekend hike?",
    "How far away is the moon?",
    "What is a healthy idea for breakfast?",
    "Can you explain how rainbows form?",
    "What are some tips for learning a new language?",
    "How do plants make their own food?",
)

# (part 1, part 2) of a user turn with a pause in the middle.
PAUSE_PARTS = (
    ("So I was thinking about", "maybe going to the beach this weekend."),
    ("I wanted to ask you", "what you think about electric cars."),
    ("My favorite thing to cook is", "a big pot of vegetable soup."),
    ("Yesterday I went to", "the new museum downtown."),
    ("The reason I called is", "to book a table for four people."),
    ("I'm not really sure if", "I should learn the piano or the guitar."),
    ("Could you tell me", "how long it takes to boil an egg?"),
    ("When I was a kid I", "used to collect old coins."),
    ("What I really need is", "a good plan for my garden."),
    ("Let me think, I would like", "a list of easy dinner recipes."),
)

# (context question, interruption) for v1.0 synthetic user interruption.
INTERRUPTIONS = (
    ("Could you suggest some books to help with personal development?",
     "Can we talk about something else? How about fiction books?"),
    ("Tell me about the history of the Roman Empire.",
     "Actually, can you just tell me when it fell?"),
    ("How do I bake chocolate chip cookies?", "Wait, what if I don't have any eggs?"),
    ("What are the best places to visit in Japan?", "Sorry, I meant places near Tokyo only."),
    ("Can you explain how a car engine works?", "Hold on, what about electric cars?"),
    ("What is a good workout for beginners?", "Actually, I have a bad knee. What else can I do?"),
    ("How does the stock market work?", "Can you make that simpler, please?"),
    ("Give me some ideas for a birthday party.", "Wait, it's for a five year old."),
    ("What should I know before adopting a dog?", "Actually, what about a cat instead?"),
    ("How do I start learning to code?", "Sorry, which language should I pick first?"),
)

# v1.5 overlap utterances per category.
V15_OVERLAPS = {
    "user_interruption": (
        "Sorry, can we talk about something else instead?",
        "Actually, never mind. What time is it in Tokyo?",
        "Hold on, can you make that a lot shorter?",
        "Wait, I meant the other one.",
        "Stop, let me ask you something different.",
    ),
    "user_backchannel": ("Mm-hmm.", "Yeah.", "Uh-huh.", "Right.", "Okay."),
    "talking_to_other": (
        "Hey, can you grab the keys?",
        "Honey, I'm on the phone right now.",
        "Can you close the door, please?",
        "Is dinner ready yet?",
        "Just put the box on the table, thanks.",
    ),
    "background_speech": (
        "The meeting got moved to Thursday afternoon.",
        "Did anyone see where I left my umbrella?",
        "The train was late again this morning.",
        "We should order more paper for the printer.",
        "I think it's going to rain later today.",
    ),
}


def pick(items: tuple, sample_number: int, offset: int = 0):
    """Entry for 1-based ``sample_number`` (see the module docstring)."""
    return items[(sample_number - 1 + offset) % len(items)]
