"""Will an image run on a host: which GPUs its binaries run on, which driver its CUDA needs, what the host has."""
