"""What pages contain: fingerprints, the duplicate-content index, main-content text."""
