"""The site's URLs plus ``/boom/``, a view that raises: a 500 on demand (``failing_settings``)."""

from django.urls import path

from config.urls import urlpatterns as site


def boom(request):
    raise RuntimeError("boom: a view failed on purpose")


urlpatterns = [path("boom/", boom), *site]
