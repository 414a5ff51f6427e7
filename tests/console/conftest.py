import pytest
from django.contrib.auth.models import Group, User
from django.test import Client


def _client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(admin_user) -> Client:
    """A superuser: what `manage.py createsuperuser` makes."""
    return _client_for(admin_user)


@pytest.fixture
def support_user(db) -> User:
    user = User.objects.create_user("sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="support"))
    return user


@pytest.fixture
def support(support_user) -> Client:
    return _client_for(support_user)
