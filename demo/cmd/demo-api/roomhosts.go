package main

import (
	"fmt"
	"net"
	"strings"
)

// roomInterface is a network interface of this machine, as the room's
// banner weighs it.
type roomInterface struct {
	Name         string
	Up, Loopback bool
	IPs          []net.IP
}

// localInterfaces lists this machine's interfaces (net.Interfaces, on every
// system).
func localInterfaces() []roomInterface {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []roomInterface
	for _, i := range ifs {
		ri := roomInterface{Name: i.Name, Up: i.Flags&net.FlagUp != 0, Loopback: i.Flags&net.FlagLoopback != 0}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ri.IPs = append(ri.IPs, ipn.IP)
			}
		}
		out = append(out, ri)
	}
	return out
}

// virtualInterfaces are the beginnings of the names (lowercase) of
// interfaces a room cannot reach this machine by: container and VM bridges
// and their links, and VPN tunnels (Linux, macOS, Windows).
var virtualInterfaces = []string{"docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "vxlan", "podman", "lxcbr", "lxdbr",
	"vboxnet", "vmnet", "bridge", "utun", "awdl", "llw", "tun", "tap", "wg", "tailscale", "zt", "vethernet", "virtualbox", "vmware"}

// roomHosts splits the IPv4 addresses of ifs into those to give the room
// (up, neither loopback, link-local nor of a virtual interface) and those
// left out, each with its interface's name.
func roomHosts(ifs []roomInterface) (give, left []string) {
	for _, i := range ifs {
		if !i.Up || i.Loopback {
			continue
		}
		name := strings.ToLower(i.Name)
		virtual := false
		for _, p := range virtualInterfaces {
			virtual = virtual || strings.HasPrefix(name, p)
		}
		for _, ip := range i.IPs {
			if ip.To4() == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			if virtual {
				left = append(left, fmt.Sprintf("%s (%s)", ip, i.Name))
			} else {
				give = append(give, ip.String())
			}
		}
	}
	return give, left
}
