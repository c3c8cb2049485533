// The tencentcloud resource plugin, built here because the Go module proxy refuses the
// pulumi-tencentcloud provider module: the Terraform provider for Tencent Cloud served to the
// Pulumi engine through pulumi-terraform-bridge, under the resource tokens that the Python
// SDK `tencentcloud-iac-pulumi` sends. Only the resources Spotpool declares are mapped.
package main

import (
	"fmt"

	"github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfbridge"
	shimv2 "github.com/pulumi/pulumi-terraform-bridge/v3/pkg/tfshim/sdk-v2"
	"github.com/tencentcloudstack/terraform-provider-tencentcloud/tencentcloud"
)

// version is stamped by the build (-X main.version=...) with the SDK's plugin version.
var version = "0.0.0-dev"

func main() {
	resources := map[string]*tfbridge.ResourceInfo{
		"tencentcloud_instance": {Tok: "tencentcloud:Instance/instance:Instance"},
	}
	// The Terraform provider holds ~730 resources and ~520 data sources. The SDK validates
	// every schema of each on every Configure (a regexp compiled per field name: 0.09 CPU-s,
	// half the plugin's CPU in a run) and the bridge indexes them all at start. Only the
	// mapped resources are kept: no data source (the program invokes none), no resource
	// under a default token.
	tf := tencentcloud.Provider()
	for name := range tf.ResourcesMap {
		if _, mapped := resources[name]; !mapped {
			delete(tf.ResourcesMap, name)
		}
	}
	for name := range tf.DataSourcesMap {
		delete(tf.DataSourcesMap, name)
	}
	info := tfbridge.ProviderInfo{
		P:         shimv2.NewProvider(tf),
		Name:      "tencentcloud",
		Version:   version,
		Resources: resources,
	}
	// The engine asks for the schema only for code generation; a stub names the package.
	schema := []byte(fmt.Sprintf(`{"name":"tencentcloud","version":%q}`, version))
	tfbridge.Main("tencentcloud", version, info, schema)
}
