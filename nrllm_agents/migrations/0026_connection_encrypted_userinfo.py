"""A connection's URL credentials (``user:password@``) encrypted at rest, like its key: each
stored URL loses them to ``encrypted_userinfo``; going back puts them back."""

from django.db import migrations, models


def encrypt_userinfo(apps, schema_editor):
    from nrllm_agents.crypto.vault import encrypt
    from nrllm_agents.models import split_userinfo

    Connection = apps.get_model("nrllm_agents", "Connection")
    for row in Connection.objects.filter(base_url__contains="@"):
        bare, userinfo = split_userinfo(row.base_url)
        if userinfo:
            row.base_url, row.encrypted_userinfo = bare, encrypt(userinfo)
            row.save(update_fields=["base_url", "encrypted_userinfo"])


def decrypt_userinfo(apps, schema_editor):
    from nrllm_agents.crypto.vault import decrypt
    from nrllm_agents.models import with_userinfo

    Connection = apps.get_model("nrllm_agents", "Connection")
    for row in Connection.objects.exclude(encrypted_userinfo=""):
        row.base_url = with_userinfo(row.base_url, decrypt(row.encrypted_userinfo))
        row.save(update_fields=["base_url"])


class Migration(migrations.Migration):
    dependencies = [
        ("nrllm_agents", "0025_ag_ui"),
    ]

    operations = [
        migrations.AddField(
            model_name="connection",
            name="encrypted_userinfo",
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.RunPython(encrypt_userinfo, decrypt_userinfo),
    ]
