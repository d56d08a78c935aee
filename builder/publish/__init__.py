"""Publishing known-good images: the gate (pure: which smoke result allows a push), the tags
(pure: the immutable tag and the floating ones), and the publisher (I/O: push, digest, manifest)."""
