"""`llamalab tune`: stage one (dry runs, the search space, the verified front) and stage two (the race), the pick's
rule.
"""
