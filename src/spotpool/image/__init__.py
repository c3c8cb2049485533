"""The operator image: the container tools, the base images and a build cached on its inputs."""
