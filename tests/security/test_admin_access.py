"""The admin console: staff only, and every form POST needs the CSRF token."""

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

pytestmark = pytest.mark.django_db

PAGES = ["/admin/", "/admin/auth/group/", "/admin/auth/group/add/"]


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("who", ["anonymous", "active non-staff user"])
def test_admin_pages_send_anyone_but_staff_to_the_login_page(client, path, who):
    if who != "anonymous":
        client.force_login(User.objects.create_user("reader", password="pw-not-used"))

    response = client.get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.fixture
def staff_client() -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("admin", password="pw-not-used"))
    return client


def test_an_admin_form_post_without_the_csrf_token_is_refused(staff_client):
    response = staff_client.post("/admin/auth/group/add/", {"name": "intruders"})

    assert response.status_code == 403
    assert not Group.objects.filter(name="intruders").exists()


def test_the_same_post_with_the_token_goes_through(staff_client):
    staff_client.get("/admin/auth/group/add/")  # sets the CSRF cookie
    token = staff_client.cookies["csrftoken"].value

    response = staff_client.post("/admin/auth/group/add/", {"name": "operators", "csrfmiddlewaretoken": token})

    assert response.status_code == 302
    assert Group.objects.filter(name="operators").exists()


def test_the_login_form_itself_needs_the_csrf_token():
    User.objects.create_superuser("admin", password="correct horse")
    client = Client(enforce_csrf_checks=True)

    response = client.post("/admin/login/", {"username": "admin", "password": "correct horse"})

    assert response.status_code == 403
    assert "_auth_user_id" not in client.session
