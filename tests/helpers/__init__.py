"""What the tests (and bench/) share: servers they start, stores, rows, fakes. Not tests themselves."""
