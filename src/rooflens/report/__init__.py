"""Renderers: lay out what the analysis computed (terminal, JSON); they compute nothing."""
