"""Offline policy code (torch): architecture, training, sparsity, export."""
