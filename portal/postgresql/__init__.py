"""Django's PostgreSQL backend, with pooled connections checked as they are handed out (``base``)."""
