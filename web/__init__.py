"""The web app: models, admin, views and management commands."""
