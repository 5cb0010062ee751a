"""Per-host decisions: politeness, trap rules and page budgets, which links are followed."""
