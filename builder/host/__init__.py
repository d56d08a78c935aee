"""What this host can run: host facts (engine, NVIDIA, AMD), doctor verdicts, failure diagnosis."""
