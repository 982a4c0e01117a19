"""The model store: names, blobs, manifests and pulls."""
