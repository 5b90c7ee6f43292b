"""A small hand-written fact set used across tests (a town's water utility and its people)."""

WATER_FACTS = [
    {"source": "Mara Lindqvist", "target": "Harbor Water Utility", "relation": "directs",
     "fact": "Mara Lindqvist directs the Harbor Water Utility since 2019",
     "source_labels": ["Person"], "target_labels": ["Organization"],
     "source_summary": "Engineer, director of the town's water utility"},
    {"source": "Harbor Water Utility", "target": "North Reservoir", "relation": "operates",
     "fact": "Harbor Water Utility operates the North Reservoir, the town's main drinking water source"},
    {"source": "North Reservoir", "target": "Algae bloom", "relation": "affected by",
     "fact": "An algae bloom closed the North Reservoir for three weeks in August 2024",
     "valid_at": "2024-08-01T00:00:00Z", "invalid_at": "2024-08-22T00:00:00Z"},
    {"source": "Tomas Berg", "target": "Harbor Bakery", "relation": "owns",
     "fact": "Tomas Berg owns the Harbor Bakery on the market square"},
    {"source": "Harbor Bakery", "target": "Sourdough", "relation": "sells",
     "fact": "Harbor Bakery sells sourdough bread baked every morning"},
    {"source": "Town Council", "target": "Harbor Water Utility", "relation": "funds",
     "fact": "The Town Council funds the Harbor Water Utility's pipe renewal programme"},
    {"source": "Ines Okafor", "target": "Town Council", "relation": "chairs",
     "fact": "Ines Okafor chairs the Town Council's budget committee"},
    {"source": "Harbor Ferry", "target": "Harbor Island", "relation": "connects",
     "fact": "The Harbor Ferry connects the town to Harbor Island every hour"},
]
