"""What other commands print from their own results: a plan, a repository's plan, tune's stage one."""
