"""Notes written by agents through the approval-gated ``write_note`` tool: a read-only list."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from ..models import Note
from .bases import NoteModelAdmin


@admin.register(Note)
class NoteAdmin(NoteModelAdmin):
    """Read-only: a note is what an agent produced after a human approved it."""

    list_display = ("title", "run", "created_at")
    list_select_related = ("run",)
    list_filter = ("created_at",)
    search_fields = ("title", "body")
    fields = ("title", "body", "run", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Note | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Note | None = None) -> bool:
        return False
