"""What the emulated cloud sells: regions and zones, instance types, public images."""

from dataclasses import dataclass

# Region → number of availability zones (zone names are `<region>-<n>`).
REGIONS: dict[str, int] = {
    "ap-guangzhou": 7,
    "ap-shanghai": 8,
    "ap-beijing": 7,
    "ap-chengdu": 2,
    "ap-chongqing": 1,
    "ap-nanjing": 3,
    "ap-hongkong": 3,
    "ap-singapore": 4,
    "ap-tokyo": 2,
    "ap-seoul": 2,
    "ap-bangkok": 2,
    "ap-jakarta": 2,
    "ap-mumbai": 2,
    "na-siliconvalley": 2,
    "na-ashburn": 2,
    "eu-frankfurt": 2,
    "sa-saopaulo": 1,
}


def zones(region: str) -> list[str]:
    return [f"{region}-{n}" for n in range(1, REGIONS.get(region, 0) + 1)]


@dataclass(frozen=True)
class InstanceType:
    cpu: int
    memory_gb: int
    gpu_count: float = 0
    gpu_type: str = ""


INSTANCE_TYPES: dict[str, InstanceType] = {
    "S5.SMALL1": InstanceType(1, 1),
    "S5.MEDIUM2": InstanceType(2, 2),
    "S5.MEDIUM4": InstanceType(2, 4),
    "S5.LARGE8": InstanceType(4, 8),
    "S5.2XLARGE16": InstanceType(8, 16),
    "SA2.MEDIUM4": InstanceType(2, 4),
    "SA2.LARGE8": InstanceType(4, 8),
    "GN7.2XLARGE32": InstanceType(8, 32, 1, "NVIDIA T4"),
    "GN7.5XLARGE80": InstanceType(20, 80, 1, "NVIDIA T4"),
    "GN7.10XLARGE160": InstanceType(40, 160, 2, "NVIDIA T4"),
    "GN7.20XLARGE320": InstanceType(80, 320, 4, "NVIDIA T4"),
    "GN10Xp.2XLARGE40": InstanceType(10, 40, 1, "NVIDIA V100"),
    "GN10Xp.5XLARGE100": InstanceType(20, 100, 2, "NVIDIA V100"),
    "GT4.4XLARGE96": InstanceType(16, 96, 1, "NVIDIA A100"),
    "GT4.41XLARGE948": InstanceType(164, 948, 8, "NVIDIA A100"),
    # GPU types the operator has no table for: it counts their GPUs from this data (Gpu)
    "PNV4.7XLARGE116": InstanceType(28, 116, 1, "NVIDIA A10"),
    "PNV4.14XLARGE232": InstanceType(56, 232, 2, "NVIDIA A10"),
}


@dataclass(frozen=True)
class Image:
    image_id: str
    name: str
    os_name: str
    platform: str


PUBLIC_IMAGES: list[Image] = [
    Image("img-487zeit5", "TencentOS Server 3.1 (TK4)", "TencentOS Server 3.1 (TK4)", "TencentOS"),
    Image(
        "img-22trbn9x", "Ubuntu Server 22.04 LTS 64bit", "Ubuntu Server 22.04 LTS 64bit", "Ubuntu"
    ),
    Image(
        "img-mmytdhbn", "Ubuntu Server 20.04 LTS 64bit", "Ubuntu Server 20.04 LTS 64bit", "Ubuntu"
    ),
    Image("img-l8og963d", "CentOS 7.9 64bit", "CentOS 7.9 64bit", "CentOS"),
    Image(
        "img-eb30mz89", "Ubuntu 22.04 GPU (CUDA 12.2)", "Ubuntu Server 22.04 LTS 64bit", "Ubuntu"
    ),
]


def image_os_name(image_id: str) -> str:
    for image in PUBLIC_IMAGES:
        if image.image_id == image_id:
            return image.os_name
    return "Custom Image"
