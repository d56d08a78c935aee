"""In-container smoke tests: locked-down run arguments, the container runner, and the checks it runs (checks/)."""
