"""The heterojob Streamlit console (served by `heterojob console`)."""
