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
    (
        "Could you suggest some books to help with personal development?",
        "Can we talk about something else? How about fiction books?",
    ),
    (
        "Tell me about the history of the Roman Empire.",
        "Actually, can you just tell me when it fell?",
    ),
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


# (part 1, part 2, part 3) of a conversational turn with two pauses (candor_pause_handling).
CANDOR_PAUSE_PARTS = (
    (
        "I think the best part of the trip was",
        "probably the food,",
        "especially the little place by the harbor.",
    ),
    ("So my plan for the summer is", "to fix up the old bike", "and ride it to work every day."),
    (
        "What I keep wondering about is",
        "whether we should move",
        "somewhere a bit closer to the city.",
    ),
    ("The thing about my job is", "that nobody really knows", "what the final deadline is."),
    (
        "When my sister visited last week",
        "we went to the market",
        "and bought way too many apples.",
    ),
    ("Honestly the hardest part was", "getting up so early", "for the whole first month."),
    ("I was going to say that", "the movie was too long", "but the ending was worth it."),
    ("My neighbor has this dog", "that barks at every bird", "from morning until night."),
    ("If I could learn one thing", "it would be how to paint", "with those bright water colors."),
    ("The other day at the library", "I found an old map", "of the town from a hundred years ago."),
)

# Sentences of the long user monologues (icc_backchannel); sample k starts at a rotating offset.
ICC_SENTENCES = (
    "So last weekend I finally went camping with my brother.",
    "We drove up to the lake on Friday evening after work.",
    "It took us almost three hours because of the traffic.",
    "By the time we got there it was already getting dark.",
    "We had to set up the tent with our phone lights.",
    "And of course we forgot the hammer at home.",
    "So my brother used a big flat rock instead.",
    "The next morning the lake was completely still.",
    "We rented a small boat and went out fishing.",
    "I did not catch anything for the first two hours.",
    "Then suddenly I caught a really big trout.",
    "My brother did not believe me until he saw it.",
    "We cooked it over the fire for dinner that night.",
    "Honestly it was the best fish I have ever eaten.",
    "On Sunday it started raining so we packed up early.",
    "But I think we are going back there next month.",
)

# Seed-TTS-format synthetic list: prompt sentences (the reference voice) and target sentences.
SEEDTTS_PROMPTS = (
    "I usually take the early train into the city.",
    "The garden looks lovely after the rain.",
    "We talked about it for a long time yesterday.",
    "She left the keys on the kitchen table.",
    "The museum is closed on Mondays.",
    "He plays the guitar every evening.",
    "Our team won the match on Saturday.",
    "The bakery on the corner sells fresh bread.",
)
SEEDTTS_TARGETS = (
    "Please remember to bring your umbrella tomorrow.",
    "The weather forecast says it will be sunny all week.",
    "Could you send me the report before lunch?",
    "Reading a good book is the best way to relax.",
    "The concert starts at eight o'clock tonight.",
    "Turn left at the second traffic light.",
    "I have never seen so many stars in the sky.",
    "Let's meet at the coffee shop near the station.",
)
