"""Amazon MSK's IAM authentication over OAUTHBEARER: the token is a
SigV4-presigned ``kafka-cluster:Connect`` request made by AWS's own signer
package, ``aws-msk-iam-sasl-signer-python`` (``pip install 'kwire[aws]'``),
with the credentials boto's default chain finds, a named profile
(``sasl_oauthbearer_aws_profile``) or an assumed role
(``sasl_oauthbearer_aws_role_arn``), for ``sasl_oauthbearer_aws_region``.
"""

from __future__ import annotations

from typing import Any, Mapping

from kwire.config import ConfigError
from kwire.sasl.oauth.token import OAuthToken

__all__ = ["MskIamToken"]


class MskIamToken:
    """Signs a new MSK IAM token at each call."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        try:
            from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
        except ImportError:
            raise ConfigError("sasl_oauthbearer_method=aws_msk_iam needs AWS's signer: "
                              "pip install 'kwire[aws]'") from None
        self._provider = MSKAuthTokenProvider
        self.region = cfg.get("sasl_oauthbearer_aws_region")
        if not self.region:
            raise ConfigError("sasl_oauthbearer_method=aws_msk_iam needs sasl_oauthbearer_aws_region "
                              "(the cluster's region, e.g. us-east-1)")
        self._profile = cfg.get("sasl_oauthbearer_aws_profile")
        self._role = cfg.get("sasl_oauthbearer_aws_role_arn")
        self._session = cfg.get("sasl_oauthbearer_aws_role_session_name") or "kwire"

    def __call__(self) -> OAuthToken:
        if self._role:
            token, expiry_ms = self._provider.generate_auth_token_from_role_arn(self.region, self._role,
                                                                               self._session)
        elif self._profile:
            token, expiry_ms = self._provider.generate_auth_token_from_profile(self.region, self._profile)
        else:
            token, expiry_ms = self._provider.generate_auth_token(self.region)
        return OAuthToken(token, expiry_ms / 1000.0)
