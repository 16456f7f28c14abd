"""The page a locked-out login gets (django-axes calls ``locked_out``): the login form
again, saying why the password was not even checked and for how long."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(
    request: HttpRequest, original_response: object = None, credentials: object = None
) -> HttpResponse:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    message = (
        f"Too many failed log-ins ({settings.AXES_FAILURE_LIMIT}) for this username from your address: "
        f"logging in is locked for {minutes} minutes. Try again later, or ask an administrator to "
        "unlock it (python manage.py axes_reset_username USERNAME)."
    )
    context = {
        "form": AuthenticationForm(request),
        "locked_out": message,
        "next": request.POST.get("next", ""),
    }
    return render(request, "registration/login.html", context, status=429)
