"""The shapes of the manifest: a tool, its Go build, its source patches and local source."""

from pydantic import BaseModel, Field


class GoBuild(BaseModel):
    """A `go build` of one main package, from a throwaway wrapper module."""

    module: str
    version: str = Field(description="tag or commit of `module`")
    package: str = Field(description="import path of the main package")
    ldflags: list[str] = []
    tags: list[str] = Field(default_factory=list, description="go build -tags")
    # Local-path replaces (`=> ./staging/...`, `=> ../sdk`) are not in the module download:
    # the wrapper points each at the published module instead, at the version the main
    # module requires, or at this one where it requires a placeholder v0.0.0.
    sibling_version: str | None = None
    # A main package of our own (a directory under toolchain/recipes/) built against
    # `module`, for an upstream tool whose own main module the proxy refuses.
    recipe: str | None = None
    requires: dict[str, str] = Field(default_factory=dict, description="module -> version")
    replaces: dict[str, str] = Field(
        default_factory=dict, description="old module -> 'new module version'"
    )
    # Modules swapped for a package of our own (a directory under toolchain/recipes/), for
    # dependencies whose package init costs every run of the tool and that we never use.
    stubs: dict[str, str] = Field(default_factory=dict, description="module -> recipe directory")
    # The checksum database answers 404 for many older releases the proxy still serves.
    checksum_db: bool = True
    # Small edits to a dependency's published source, built from a patched copy.
    patches: list["SourcePatch"] = Field(default_factory=list)


class SourcePatch(BaseModel):
    """One exact text replacement in one file of a published module (applied to a copy; the
    build fails when `old` is not found exactly once, so a new release is never patched blind)."""

    module: str
    version: str
    file: str = Field(description="path inside the module")
    old: str
    new: str
    why: str


class LocalSource(BaseModel):
    """A tool's source folder inside the local-source directory (`--local-source`,
    `$SPOTPOOL_LOCAL_SOURCE`): the last resort, for offline mirrors and refused modules."""

    folder: str = Field(description="folder name inside the local-source directory")
    module_dir: str = Field(".", description="where its go.mod is, inside the folder")
    package: str = Field(".", description="the main package, relative to module_dir")
    ldflags: list[str] = []


class Tool(BaseModel):
    name: str
    version: str
    # Bumped when the build changes but the version does not, so every cache builds it anew.
    revision: str = ""
    binary: str
    version_args: list[str] = Field(description="arguments that make the binary print its version")
    # For a binary with no version flag: text its embedded Go build info holds (the -ldflags
    # that stamped the version), read from the file instead of running it.
    version_in_build_info: str | None = None
    build: GoBuild | None = None
    download_url: str | None = None
    download_member: str | None = Field(None, description="path of the binary in the archive")
    plugin: tuple[str, str] | None = Field(None, description="(kind, name) to register with pulumi")
    extra_files: dict[str, tuple[str, str, str]] = Field(
        default_factory=dict,
        description="file name -> (module, version, path in module) copied beside the binary",
    )
    local_source: LocalSource | None = None
    # Files that must sit in another tool's directory, as the official release lays them out.
    beside: str | None = Field(None, description="the tool whose directory holds this one too")
    optional_because: str | None = Field(
        None, description="why nothing in the project needs it: missing is a warning, not a failure"
    )
