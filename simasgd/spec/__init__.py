"""What is run: the algorithms' definitions, the scenario, its loading and validation, timing distributions,
seeds, executor traits."""
