"""Rules: facts turned into verdicts (the decision chain) and findings, each rule a lazy frame."""
