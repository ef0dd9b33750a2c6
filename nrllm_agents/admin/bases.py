"""Django's admin and form base classes as the type checker sees them: generic over their model.

django-stubs makes ``ModelAdmin``, ``ModelForm`` and ``TabularInline`` generic; at run time they
are not subscriptable (that takes ``django-stubs-ext``, a development dependency), so each base
is named here once: parametrised for mypy, Django's own class for Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin

from ..models import Agent, AgentRun, AgentVersion, Connection, Note, Thread

if TYPE_CHECKING:
    AnyModelAdmin = admin.ModelAdmin[Any]
    RunModelAdmin = admin.ModelAdmin[AgentRun]
    ThreadModelAdmin = admin.ModelAdmin[Thread]
    NoteModelAdmin = admin.ModelAdmin[Note]
    ConnectionModelForm = forms.ModelForm[Connection]
    AgentModelForm = forms.ModelForm[Agent]
    AgentVersionTabularInline = admin.TabularInline[AgentVersion, Agent]
else:
    AnyModelAdmin = RunModelAdmin = ThreadModelAdmin = NoteModelAdmin = admin.ModelAdmin
    ConnectionModelForm = AgentModelForm = forms.ModelForm
    AgentVersionTabularInline = admin.TabularInline
