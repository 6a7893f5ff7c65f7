"""`llamalab plan` and `llamalab bisect`: memory answers from dry runs, without loading weights."""
