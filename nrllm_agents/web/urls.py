"""The playground pages and sign-in, included by ``nrllm_agents.urls`` under the host's prefix.

The pages follow a run on the browser stream, ``api/runs/<id>/stream/``, which the REST API
routes (``nrllm_api:run-stream``).
"""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from ..access import signin
from . import threads, tree, views

app_name = "nrllm_web"

urlpatterns = [
    path("", views.index, name="index"),
    path("playground/", views.playground, name="playground"),
    path("playground/runs/", views.start_run, name="start"),
    path("playground/runs/<uuid:run_id>/", views.run_page, name="run"),
    path("playground/runs/<uuid:run_id>/picture/", views.run_picture, name="run-picture"),
    path("playground/runs/<uuid:run_id>/tree/", tree.run_tree, name="run-tree"),
    path("playground/runs/<uuid:run_id>/cancel/", views.cancel_run, name="cancel"),
    path("playground/runs/<uuid:run_id>/approve/", views.approve_run, name="approve"),
    path("playground/runs/<uuid:run_id>/resolve/", views.resolve_run, name="resolve"),
    path("playground/runs/<uuid:run_id>/fork/", views.fork_run, name="fork"),
    path("playground/threads/", threads.thread_list, name="threads"),
    path("playground/threads/new/", threads.new_thread, name="thread-new"),
    path("playground/threads/<uuid:thread_id>/", threads.thread_page, name="thread"),
    path("playground/threads/<uuid:thread_id>/messages/", threads.post_message, name="thread-message"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            template_name="nrllm_agents/login.html",
            authentication_form=signin.SignInForm,  # says so when sign-in is throttled
            redirect_authenticated_user=True,
            next_page=reverse_lazy("nrllm_web:playground"),
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page=reverse_lazy("nrllm_web:login")), name="logout"),
]
