"""The REST API (Django REST framework): runs listed, started, inspected, approved and cancelled.

Mounted by ``config/urls.py`` under ``/api/``; see ``urls.py`` for the endpoints and
``/api/docs/`` for the served OpenAPI description.
"""
