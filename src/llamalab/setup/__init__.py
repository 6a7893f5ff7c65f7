"""The set-up a command resolves once: options, progress hooks, the prepared study (builds, model, devices) and a
configuration's dry run on it.
"""
