"""Runtime tests: services, the lifeline and real worker processes."""
