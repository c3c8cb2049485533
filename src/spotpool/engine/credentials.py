"""Cloud credentials, held as secrets and handed to the provider only as environment variables."""

from pydantic import BaseModel, SecretStr


class Credentials(BaseModel):
    secret_id: SecretStr
    secret_key: SecretStr

    def provider_env(self) -> dict[str, str]:
        """The tencentcloud provider reads these when its config names no keys."""
        return {
            "TENCENTCLOUD_SECRET_ID": self.secret_id.get_secret_value(),
            "TENCENTCLOUD_SECRET_KEY": self.secret_key.get_secret_value(),
        }
