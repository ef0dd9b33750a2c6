"""Django's admin and form base classes as the type checker sees them: generic over their model.

django-stubs makes ``ModelAdmin``, ``ModelForm`` and ``TabularInline`` generic; at run time they
are not subscriptable (that takes ``django-stubs-ext``, a development dependency), so each base
is named here once: parametrised for mypy, Django's own class for Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django import forms
from django.contrib import admin

from ..models import Agent, AgentRun, AgentVersion, Connection, Note, Thread

if TYPE_CHECKING:
    AnyModelAdmin: TypeAlias = admin.ModelAdmin[Any]
    RunModelAdmin: TypeAlias = admin.ModelAdmin[AgentRun]
    ThreadModelAdmin: TypeAlias = admin.ModelAdmin[Thread]
    NoteModelAdmin: TypeAlias = admin.ModelAdmin[Note]
    ConnectionModelForm: TypeAlias = forms.ModelForm[Connection]
    AgentModelForm: TypeAlias = forms.ModelForm[Agent]
    AgentVersionTabularInline: TypeAlias = admin.TabularInline[AgentVersion, Agent]
else:
    AnyModelAdmin = RunModelAdmin = ThreadModelAdmin = NoteModelAdmin = admin.ModelAdmin
    ConnectionModelForm = AgentModelForm = forms.ModelForm
    AgentVersionTabularInline = admin.TabularInline
