"""The errors the emulated API answers with, using Tencent Cloud's own codes."""


class ApiError(Exception):
    """An API 3.0 error: becomes `{"Response": {"Error": {"Code", "Message"}, "RequestId"}}`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def missing(parameter: str) -> ApiError:
    return ApiError(
        "MissingParameter", f"The request is missing a required parameter `{parameter}`."
    )


def invalid_value(parameter: str, why: str, code: str = "InvalidParameterValue") -> ApiError:
    return ApiError(code, f"The value of parameter `{parameter}` is invalid: {why}")


def not_found(instance_ids: list[str]) -> ApiError:
    return ApiError(
        "InvalidInstanceId.NotFound",
        f"The instance ids {', '.join(instance_ids)} do not exist in this region.",
    )
