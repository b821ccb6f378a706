"""What the tests share: harnesses, generators, the reference model, the services and
processes the slow tests start, and readers of committed outputs."""
