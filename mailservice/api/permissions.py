from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from apikeys.models import ApiKey, Permission
from mailservice.errors import ErrorCode, PermissionDenied


class HasApiKey(BasePermission):
    required: str | None = None

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not isinstance(request.auth, ApiKey):
            raise NotAuthenticated("An API key is required: send 'Authorization: Bearer <API key>'")
        if self.required and not request.auth.has_permission(self.required):
            raise PermissionDenied(
                f"This API key lacks the {self.required} permission", code=ErrorCode.MISSING_PERMISSION
            )
        return True


class CanSend(HasApiKey):
    required = Permission.SEND


class CanRead(HasApiKey):
    required = Permission.READ


class CanWriteSuppressions(HasApiKey):
    required = Permission.SUPPRESSIONS_WRITE
