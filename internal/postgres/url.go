package postgres

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// ParseURL returns a URL of several hosts (postgres://u@db1:5432,db2:5433/app, as
// pg_auto_failover writes it) in lib/pq's keyword form, which takes several; else url as it is.
// net/url reads no list of hosts, so the list is cut out first and the rest (user,
// database, parameters) read by net/url as one host's URL. With
// target_session_attrs=read-write a connect goes to the first host that takes
// writes, which after a failover is the promoted standby.
func ParseURL(raw string) (string, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hostlist := "", authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, hostlist = authority[:at+1], authority[at+1:]
	}
	if (scheme != "postgres" && scheme != "postgresql") || !strings.Contains(hostlist, ",") {
		return raw, nil
	}
	u, err := url.Parse(scheme + "://" + userinfo + "localhost" + tail) // the rest, as net/url reads it
	if err != nil {
		return "", err
	}
	var hosts, ports []string
	anyPort := false
	for h := range strings.SplitSeq(hostlist, ",") {
		host, port, err := splitHostPort(h)
		if err != nil {
			return "", fmt.Errorf("host %q: %w", h, err)
		}
		hosts, ports = append(hosts, host), append(ports, cmp.Or(port, "5432")) // lib/pq reads no empty item
		anyPort = anyPort || port != ""
	}
	password, _ := u.User.Password()
	params := map[string]string{"user": u.User.Username(), "password": password,
		"dbname": strings.TrimPrefix(u.Path, "/"), "host": strings.Join(hosts, ",")}
	if anyPort {
		params["port"] = strings.Join(ports, ",")
	}
	for k, v := range u.Query() {
		if params[k] != "" && (k == "host" || k == "port") {
			return "", fmt.Errorf("parameter %s given both in the hosts and after ?", k)
		}
		params[k] = v[len(v)-1]
	}
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	var kvs []string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if params[k] != "" {
			kvs = append(kvs, k+"='"+quote.Replace(params[k])+"'")
		}
	}
	return strings.Join(kvs, " "), nil
}

// splitHostPort splits host, host:port, [v6], [v6]:port or empty; the host
// is unescaped (%2Ftmp is the socket folder /tmp).
func splitHostPort(h string) (host, port string, err error) {
	host = h
	if i := strings.LastIndexByte(h, ':'); i > strings.LastIndexByte(h, ']') {
		host, port = h[:i], h[i+1:]
	}
	if v6, ok := strings.CutPrefix(host, "["); ok {
		if host, ok = strings.CutSuffix(v6, "]"); !ok {
			return "", "", errors.New("no ] closes the [")
		}
	}
	if strings.Trim(port, "0123456789") != "" {
		return "", "", fmt.Errorf("port %q is not a number", port)
	}
	host, err = url.PathUnescape(host)
	return host, port, err
}
