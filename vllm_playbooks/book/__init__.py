"""The book: executing notebooks, figures, the site check and the workshop."""
