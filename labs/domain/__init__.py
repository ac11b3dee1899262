"""Pure decision logic: no Django, Celery or kubernetes imports (tests/domain enforces it)."""
