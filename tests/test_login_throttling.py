"""Login throttling (django-axes): wrong passwords lock a username from one address out
for a cool-off, on the dashboard's login and the admin's; a success resets the count."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.db.models import F

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def attempt(client, password, url=LOGIN, username="alice", address="203.0.113.7"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_ten_wrong_passwords_lock_the_right_one_out_until_the_cool_off_ends(client, alice, settings):
    assert settings.AXES_FAILURE_LIMIT == 10
    for _ in range(9):
        page = attempt(client, "wrong")
        assert page.status_code == 200 and "did not match" in page.content.decode()
    locked = attempt(client, "wrong")
    assert locked.status_code == 429 and "Too many failed log-ins (10)" in locked.content.decode()

    refused = attempt(client, "alice-password-1")
    assert refused.status_code == 429
    assert (
        "locked for 15 minutes" in refused.content.decode() and 'name="password"' in refused.content.decode()
    )
    assert client.get("/p/default/").status_code == 302  # not logged in
    assert attempt(client, "alice-password-1", address="198.51.100.9").status_code == 302  # another address
    client.logout()

    # The cool-off passes: the failures are now older than 15 minutes.
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=16))
    assert attempt(client, "alice-password-1").status_code == 302
    assert client.get("/p/default/").status_code == 200


def test_a_successful_login_resets_the_count(client, alice):
    for _ in range(9):
        attempt(client, "wrong")
    assert attempt(client, "alice-password-1").status_code == 302
    client.logout()
    for _ in range(9):
        assert attempt(client, "wrong").status_code == 200
    assert attempt(client, "alice-password-1").status_code == 302


def test_the_admin_login_is_throttled_too(client, django_user_model):
    django_user_model.objects.create_superuser("root", password="root-password-1")
    for _ in range(10):
        attempt(client, "wrong", url="/admin/login/", username="root")
    refused = attempt(client, "root-password-1", url="/admin/login/", username="root")
    assert refused.status_code == 429 and "Too many failed log-ins" in refused.content.decode()
    assert client.get("/admin/").status_code == 302
