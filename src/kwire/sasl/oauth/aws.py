"""Amazon MSK's IAM authentication over OAUTHBEARER: the token is a
SigV4-presigned ``kafka-cluster:Connect`` request made by AWS's own signer
package, ``aws-msk-iam-sasl-signer-python`` (``pip install 'kwire[aws]'``),
with the credentials boto's default chain finds, a named profile
(``sasl_oauthbearer_aws_profile``) or an assumed role
(``sasl_oauthbearer_aws_role_arn``), for the cluster's region: as AWS's
Java library finds it, ``sasl_oauthbearer_aws_region``, else the region in
the brokers' host names, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else
the profile's (:func:`kwire.sasl.login.aws_region`).
"""

from __future__ import annotations

from typing import Any, Mapping

from kwire.config import ConfigError
from kwire.sasl.oauth.token import OAuthToken

__all__ = ["MskIamToken", "msk_iam_callback"]


class MskIamToken:
    """Signs a new MSK IAM token at each call."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        try:
            from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
        except ImportError:
            raise ConfigError("sasl_oauthbearer_method=aws_msk_iam needs AWS's signer: "
                              "pip install 'kwire[aws]'") from None
        self._provider = MSKAuthTokenProvider
        from kwire.sasl.login import aws_region

        self.region = aws_region({"sasl.oauthbearer.aws.region": cfg.get("sasl_oauthbearer_aws_region"),
                                  "sasl.oauthbearer.aws.profile": cfg.get("sasl_oauthbearer_aws_profile"),
                                  "bootstrap.servers": [h for h, _ in cfg.get("bootstrap_servers") or ()]})
        if not self.region:
            raise ConfigError("sasl_oauthbearer_method=aws_msk_iam needs the cluster's region: "
                              "sasl_oauthbearer_aws_region (e.g. us-east-1), bootstrap servers named "
                              "...kafka.<region>.amazonaws.com, or AWS_REGION")
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


def msk_iam_callback(region: str, profile: "str | None" = None, role_arn: "str | None" = None,
                     role_session_name: str = "kwire") -> MskIamToken:
    """A ready ``oauth_cb`` for Amazon MSK's IAM, for code that sets its
    callback itself: ``{"sasl.mechanism": "OAUTHBEARER", "oauth_cb":
    msk_iam_callback("us-east-1")}`` is ``sasl_oauthbearer_method=aws_msk_iam``."""
    return MskIamToken({"sasl_oauthbearer_aws_region": region, "sasl_oauthbearer_aws_profile": profile,
                        "sasl_oauthbearer_aws_role_arn": role_arn, "sasl_oauthbearer_aws_role_session_name":
                        role_session_name})
