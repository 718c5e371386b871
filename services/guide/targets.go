package guide

import (
	"slices"
	"strings"

	"sylk.dev/sylk/pkg/topology"
)

// Every agent the Guide routes a request to must have an inbox that a
// service of the mesh reads: an envelope published to any other inbox
// waits on the AGENTS stream until it is dead-lettered. These are the
// inboxes read, each with the service that reads it (TestRouteTargets
// checks the list against the services' code, and every target the Guide
// can produce against the list).
var inboxConsumers = map[string]string{
	topology.AgentGuide:       "services/guide",
	topology.AgentLibrarian:   "services/librarian",
	topology.AgentArchivalist: "services/archivalist",
	topology.AgentAcademic:    "services/academic",
	topology.AgentArchitect:   "services/architect",
}

// routableAgents are the agents the Guide routes requests to and a user
// may name, in the order they are offered.
var routableAgents = []string{topology.AgentLibrarian, topology.AgentArchivalist, topology.AgentAcademic, topology.AgentArchitect}

// routable reports whether agent (in any case) is one of routableAgents.
func routable(agent string) bool { return slices.Contains(routableAgents, strings.ToLower(agent)) }

// routeTarget is where a request meant for agent goes: agent itself when
// it is routable; the Architect for a worker role (engineer, inspector,
// tester), which has no inbox: workers take tasks of the runs the
// Architect's plans start, so a change of any size is planned first.
func routeTarget(agent string) (string, bool) {
	agent = strings.ToLower(strings.TrimSpace(agent))
	switch {
	case routable(agent):
		return agent, true
	case slices.Contains(topology.Roles, agent):
		return topology.AgentArchitect, true
	}
	return "", false
}

// knownAgent reports whether agent names an agent of the mesh that can
// take part in a request (a routable agent or a worker role), for records
// that name where a request went.
func knownAgent(agent string) bool {
	_, ok := routeTarget(agent)
	return ok
}
