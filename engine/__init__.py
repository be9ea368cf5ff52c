"""Pure compute for the ICLR 2025 Explorer. Nothing in engine/ imports streamlit."""
