"""What this host can run: host facts (engine, NVIDIA, AMD) and doctor verdicts."""
