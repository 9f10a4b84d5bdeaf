"""`batchtwin plan`: capacity plans (the command, its grid, search, report and plots)."""
