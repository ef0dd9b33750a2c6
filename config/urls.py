"""URL configuration of the demo site: the admin, and the app at the root (a host project mounts
it under a prefix of its own: docs/quickstart.md)."""

from django.contrib import admin
from django.urls import include, path

from nrllm_agents.access import AdminSignInForm

# The admin's sign-in form says so when sign-in is throttled (nrllm_agents.access.signin).
admin.site.login_form = AdminSignInForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("nrllm_agents.urls")),
]
