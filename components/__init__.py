"""Shared Streamlit UI pieces. Nothing here imports torch."""
