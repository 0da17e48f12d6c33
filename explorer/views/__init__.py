"""One passive view per panel (a sub-package each): data in through setters, intent signals out. Never torch, gptcore or the session."""
