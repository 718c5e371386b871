// Package deploy holds the tests of Sylk's deployment files: the container
// build (docker/Dockerfile), the compose stack (compose/docker-compose.yml) and
// the Helm chart (helm/sylk). They check the files without a container engine
// or a cluster; see README.md for how to use the files themselves.
package deploy
