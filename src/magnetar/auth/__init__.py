"""Security: authentication (JWT tokens, basic/htpasswd, mutual TLS, the anonymous role)
and authorization (super users, tenant admins, namespace/topic/subscription permissions).

Pure logic only: the broker (``magnetar.broker.access``) and the admin app read the stored
tenant and namespace policies and ask these modules for decisions.
"""

from magnetar.auth.authentication import (
    UNAUTHENTICATED,
    AuthenticatedRole,
    AuthenticationService,
)
from magnetar.auth.authorization import AuthAction, Authorizer, AuthPolicies, TopicOperation
from magnetar.auth.config import AuthConfig, AuthConfigError, ProviderName, parse_provider_names

__all__ = [
    "UNAUTHENTICATED",
    "AuthAction",
    "AuthConfig",
    "AuthConfigError",
    "AuthPolicies",
    "AuthenticatedRole",
    "AuthenticationService",
    "Authorizer",
    "ProviderName",
    "TopicOperation",
    "parse_provider_names",
]
