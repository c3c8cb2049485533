"""Where an `s3://` backend really is (its bucket, prefix, endpoint, region and addressing), and
which requests of a run stay inside its bucket and prefix: what the fencing S3 proxy
(s3_fence.py) forwards, and where."""

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit


@dataclass(frozen=True)
class Upstream:
    """Where the backend really is, from its s3:// URL (the shape Pulumi takes)."""

    bucket: str
    prefix: str
    scheme: str
    host: str
    region: str
    path_style: bool

    @classmethod
    def parse(cls, url: str, env: Mapping[str, str]) -> "Upstream":
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        endpoint = query.get("endpoint") or "s3.amazonaws.com"
        secure = not endpoint.startswith("http://") and query.get("disable_https") != "true"
        host = endpoint.split("://", 1)[-1].rstrip("/")
        path_style = "true" in (query.get("use_path_style"), query.get("s3ForcePathStyle"))
        region = query.get("region") or env.get("AWS_REGION") or "us-east-1"
        return cls(
            parts.netloc, parts.path.strip("/"), "https" if secure else "http", host, region,
            path_style,
        )  # fmt: skip

    def target(self, path: str) -> tuple[str, str]:
        """(host, path) of a path-style request `/bucket/key` on the real endpoint (one that
        `confined` let through)."""
        if self.path_style:
            return self.host, path
        rest = path.removeprefix(f"/{self.bucket}")
        if rest and not rest.startswith("/"):  # `/bucket@other/x` would name another host
            raise ValueError(f"not a path in bucket {self.bucket}")
        return f"{self.bucket}.{self.host}", rest or "/"

    def confined(
        self, method: str, path: str, query: str, headers: Mapping[str, str]
    ) -> str | None:
        """Why a request reaches outside the backend's bucket and prefix, or None if it
        stays inside: an object under the prefix, a listing of it, the bucket's location."""
        decoded = unquote(path)
        bucket_path = f"/{self.bucket}"
        if decoded in (bucket_path, f"{bucket_path}/"):  # the bucket itself
            params = dict(parse_qsl(query, keep_blank_values=True))
            if method not in ("GET", "HEAD"):
                return "a write to the bucket itself"
            if "location" in params or method == "HEAD":
                return None
            listed = params.get("prefix", "")
            if set(params) - {
                "list-type",
                "prefix",
                "delimiter",
                "max-keys",
                "continuation-token",
                "start-after",
                "encoding-type",
                "marker",
                "fetch-owner",
            }:
                return "a bucket sub-resource other than a listing"
            if self.prefix and not (listed + "/").startswith(f"{self.prefix}/"):
                return f"a listing outside the prefix {self.prefix}/"
            return None
        if not decoded.startswith(f"{bucket_path}/"):
            return f"a path outside the bucket {self.bucket}"
        key = decoded[len(bucket_path) + 1 :]
        if any(part in (".", "..") for part in key.split("/")) or "\\" in key:
            return "a relative path segment"
        if self.prefix and not key.startswith(f"{self.prefix}/"):
            return f"a key outside the prefix {self.prefix}/"
        source = headers.get("x-amz-copy-source")
        if source is not None:
            copied = unquote(source.split("?", 1)[0]).lstrip("/")
            inside = f"{self.bucket}/{self.prefix}/" if self.prefix else f"{self.bucket}/"
            if not copied.startswith(inside) or ".." in copied.split("/"):
                return "a copy from outside the backend"
        return None

    def key(self, path: str) -> str:
        """The key relative to the backend's root (`.pulumi/…`) of a request path."""
        key = unquote(path).removeprefix(f"/{self.bucket}").lstrip("/")
        return key.removeprefix(f"{self.prefix}/") if self.prefix else key
