"""The analyses a report is written from: speed comparisons, verdicts, context, the decision table, the answer, the
tune's front and pick.
"""
